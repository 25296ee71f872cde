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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use mull_core::{Envelope, Event, EVENT_VERSION};
use mull_store::timestamp;
use mull_store::{Appended, EventLog, LogFuture, SessionState, StoreError};
use tokio::sync::{watch, Notify};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Statement};

use crate::error::{conflict_key, connect, describe, is_conflict, parse, server_error, Target};
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
    options: PgOptions,
    state: Mutex<State>,
    /// Wakes the writer task.
    wake: Notify,
    /// What the writer task has committed (or that it stopped).
    progress: watch::Sender<Progress>,
    /// Reads, on a connection of their own.
    reads: Reads,
    /// Lease changes and renewals, on another: a renewal must never wait behind a node's
    /// reads, or a busy node would lose its leases while working.
    leases: Reads,
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
}

/// A session this node writes.
struct Held {
    epoch: i64,
    next_seq: u64,
    /// The ticket of the session's last appended row.
    last_ticket: u64,
    fenced: Option<Fence>,
}

#[derive(Clone)]
struct Fence {
    epoch: i64,
    current: i64,
    owner: String,
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
        // Never longer than a renewal period: a renewal that gives up is retried at the next.
        leases
            .limit_lock_waits((options.lease_ttl / 3).min(LEASE_LOCK_WAIT))
            .await?;
        let (progress, _) = watch::channel(Progress::default());
        let inner = Arc::new(Inner {
            target,
            options: PgOptions {
                batch_max_events: options.batch_max_events.max(1),
                ..options
            },
            state: Mutex::new(State::default()),
            wake: Notify::new(),
            progress,
            reads,
            leases,
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
        let state = lock(&self.inner.state);
        if state.failure.is_some() {
            return None;
        }
        let held = state.sessions.get(session_id)?;
        held.fenced.is_none().then_some(held.epoch)
    }

    /// The reads of this log (the whole log, any session), on its read connection.
    pub fn reads(&self) -> &Reads {
        &self.inner.reads
    }

    /// Commits everything appended so far, of every session.
    pub async fn flush_all(&self) -> Result<(), StoreError> {
        let target = lock(&self.inner.state).appended;
        self.wait_committed(target).await
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

    async fn wait_committed(&self, ticket: u64) -> Result<(), StoreError> {
        let mut rx = self.inner.progress.subscribe();
        if rx.borrow().committed < ticket {
            lock(&self.inner.state).urgent = true;
            self.inner.wake.notify_one();
        }
        let waited = rx
            .wait_for(|p| p.committed >= ticket || p.stopped)
            .await
            .map(|p| *p);
        let state = lock(&self.inner.state);
        if let Some(failure) = &state.failure {
            return Err(failure.error());
        }
        match waited {
            Ok(p) if p.committed >= ticket => Ok(()),
            _ => Err(StoreError::WriterGone),
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

    fn fence(&self, session_id: &str) -> Option<StoreError> {
        let state = lock(&self.inner.state);
        let held = state.sessions.get(session_id)?;
        held.fenced.as_ref().map(|f| StoreError::Fenced {
            session_id: session_id.to_owned(),
            epoch: f.epoch,
            current: f.current,
            owner: f.owner.clone(),
        })
    }
}

impl EventLog for PgLog {
    fn open_session<'a>(&'a self, session_id: &'a str) -> LogFuture<'a, SessionState> {
        Box::pin(async move {
            // Rows still queued under an earlier lease of this session go first.
            self.flush_all().await?;
            let epoch = self.take_lease(session_id).await?;
            let (state, last_seq) = self.inner.reads.load_session(session_id).await?;
            lock(&self.inner.state).sessions.insert(
                session_id.to_owned(),
                Held {
                    epoch,
                    next_seq: last_seq + 1,
                    last_ticket: 0,
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
        if let Some(f) = &held.fenced {
            return Err(StoreError::Fenced {
                session_id: session_id.to_owned(),
                epoch: f.epoch,
                current: f.current,
                owner: f.owner.clone(),
            });
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
            self.wait_committed(ticket).await?;
            match self.fence(session_id) {
                Some(e) => Err(e),
                None => Ok(()),
            }
        })
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
            this.wait_committed(ticket).await?;
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

    /// Not ready once the writer task stopped (its connection lost, a commit refused).
    fn health(&self) -> Result<(), StoreError> {
        if let Some(failure) = &lock(&self.inner.state).failure {
            return Err(failure.error());
        }
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
            .filter(|(_, h)| h.fenced.is_none())
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
/// a commit fails.
async fn run_writer(inner: std::sync::Weak<Inner>, client: Client, st: Statement) {
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let batch = match next_batch(&strong).await {
            Some(batch) => batch,
            None => {
                // Only this task's reference is left: every handle is gone and nothing is queued.
                drop(strong);
                if inner.strong_count() == 0 {
                    return;
                }
                continue;
            }
        };
        let last = batch.last().map_or(0, |r| r.ticket);
        match commit(&client, &st, &batch).await {
            Ok(fences) => {
                let mut state = lock(&strong.state);
                for (session, fence) in fences {
                    if let Some(held) = state.sessions.get_mut(&*session) {
                        tracing::warn!(
                            "session {session}: fenced (epoch {} taken over by {} at epoch {})",
                            fence.epoch,
                            fence.owner,
                            fence.current
                        );
                        held.fenced = Some(fence);
                    }
                }
                drop(state);
                strong.progress.send_modify(|p| p.committed = last);
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
                Fence {
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
async fn run_renewal(inner: std::sync::Weak<Inner>) {
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
            .filter(|(_, h)| h.fenced.is_none())
            .map(|(s, h)| (s.clone(), h.epoch))
            .collect();
        if held.is_empty() {
            continue;
        }
        match inner
            .leases
            .renew_leases(&held, &inner.options.node, inner.options.lease_ttl)
            .await
        {
            Ok(lost) => {
                let mut state = lock(&inner.state);
                for (session, fence) in lost {
                    if let Some(h) = state.sessions.get_mut(&session) {
                        if h.epoch == fence.0 && h.fenced.is_none() {
                            tracing::warn!(
                                "session {session}: fenced (its lease at epoch {} was taken over \
                                 by {} at epoch {})",
                                fence.0,
                                fence.2,
                                fence.1
                            );
                            h.fenced = Some(Fence {
                                epoch: fence.0,
                                current: fence.1,
                                owner: fence.2,
                            });
                        }
                    }
                }
            }
            Err(e) => tracing::warn!("renewing leases: {e}"),
        }
    }
}
