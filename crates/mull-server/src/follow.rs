//! Following one request's turns: first from the log, then live, each event exactly once.
//!
//! A client stream (live or resumed) needs every event of the turn serving its request in `seq`
//! order, with no gap and no repeat, whether the events were written before the client arrived
//! or after. A request can run more than one turn attempt: when context-overflow recovery
//! retries, the failed attempt ends (`turn_finished` with status error) and a new attempt starts
//! under the same request id. So an attempt that ends in error is not the end: the follower
//! waits for the verdict — the attempt's `turn_failed` (final) or the next attempt's
//! `turn_started` (followed on) — and, should neither come, asks the session whether the
//! request is still active before it gives up. The
//! [`TurnFollower`] gets them from two places:
//! 1. the session's broadcast bus, subscribed *before* anything is read, and
//! 2. the log, read after a flush barrier, so every event appended before the barrier is
//!    readable.
//!
//! An event appended before the subscription is in the log by the time it is read (the barrier
//! waited for it); an event appended after it is on the bus. Events from the bus at or below the
//! last `seq` taken are dropped, so the overlap is seen once. When the bus overflows (a slow
//! client), the follower flushes and reads the missed stretch back from the log.
//!
//! On a log shared by several nodes, a turn another node runs has no bus here: the follower
//! then reads the log alone, `seq > N` every poll interval ([`TurnFollower::polling`]), and
//! asks the log whether that node still holds the session when a verdict is late. Should the
//! node die mid-turn, the node that takes the session over writes the turn's end, and the
//! follower reads it like any other event.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use async_broadcast::{Receiver, RecvError};
use futures::future::BoxFuture;
use mull_core::{Envelope, Event, TurnStatus};
use mull_store::{EventLog, StoreError};

/// Events read from the log per query.
const PAGE: usize = 512;

/// How long a follower waits for `turn_finished` after a `turn_failed` before ending anyway.
const FAILED_GRACE: Duration = Duration::from_secs(2);

/// Answers whether a request is still queued or running in its session (see
/// `Session::is_request_active`; for a session another node holds, whether it still holds
/// it); a follower asks it when a failed attempt's verdict is late.
pub type RequestActive = Arc<dyn Fn(&str) -> BoxFuture<'static, bool> + Send + Sync>;

/// How often a follower waiting on the bus checks that this node still holds the session.
const HOLD_CHECK: Duration = Duration::from_millis(500);

/// How often a follower of a session taken over by another node reads the log again.
const TAKEN_OVER_POLL: Duration = Duration::from_millis(50);

/// Where a follower gets the events written after its first read.
enum Live {
    /// The session's broadcast bus (the session is open in this process).
    Bus(Receiver<Envelope>),
    /// The log, read again every interval (the session is written by another node).
    Poll(Duration),
}

/// What waiting for the next live event brought.
enum Woke {
    /// An event from the bus.
    Event(Box<Envelope>),
    /// The backlog was refilled from the log.
    Read,
    /// The bus is gone: what the log holds is all there will be.
    Closed,
    /// Nothing arrived in time.
    Quiet,
}

/// How often a follower waiting for a failed attempt's verdict asks whether the request is
/// still active.
const VERDICT_POLL: Duration = Duration::from_millis(250);

/// Why a follower could not go on.
#[derive(Debug, thiserror::Error)]
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

/// Yields the events of one request's turns, in `seq` order, exactly once, until the request's
/// last attempt ends.
pub struct TurnFollower {
    log: Arc<dyn EventLog>,
    session_id: String,
    live: Live,
    /// The request followed.
    request_id: String,
    /// The attempt being followed (its `turn_started` was seen).
    turn_id: Option<String>,
    /// Asked when a failed attempt's verdict is late; `None`: the request counts as ended.
    active: Option<RequestActive>,
    /// The current attempt ended in error: a retry or its `turn_failed` comes next.
    awaiting_verdict: bool,
    /// The request is over without a verdict: end once the log's backlog is drained.
    settle: bool,
    /// The highest seq of this session looked at (taken or skipped).
    last_seq: u64,
    /// Where the follower started (the request's events all come after it).
    first_after: u64,
    /// Events up to this seq were passed on from the bus before the session was found taken
    /// over; read again from the log, only a turn's end among them is passed on.
    replayed_through: Option<u64>,
    backlog: VecDeque<Envelope>,
    caught_up: bool,
    bus_closed: bool,
    failed: bool,
    done: bool,
}

impl TurnFollower {
    /// A follower of request `request_id` in `session_id` that considers events after
    /// `after_seq`. `bus` must have been subscribed before the caller read anything it relies
    /// on (the follower reads the log itself, after a flush, on its first call).
    pub fn new(
        log: Arc<dyn EventLog>,
        session_id: impl Into<String>,
        bus: Receiver<Envelope>,
        after_seq: u64,
        request_id: impl Into<String>,
    ) -> TurnFollower {
        Self::with_live(log, session_id, Live::Bus(bus), after_seq, request_id)
    }

    /// A follower of a request another node runs: it reads the log every `every` (see the
    /// module docs).
    pub fn polling(
        log: Arc<dyn EventLog>,
        session_id: impl Into<String>,
        every: Duration,
        after_seq: u64,
        request_id: impl Into<String>,
    ) -> TurnFollower {
        Self::with_live(log, session_id, Live::Poll(every), after_seq, request_id)
    }

    fn with_live(
        log: Arc<dyn EventLog>,
        session_id: impl Into<String>,
        live: Live,
        after_seq: u64,
        request_id: impl Into<String>,
    ) -> TurnFollower {
        TurnFollower {
            log,
            session_id: session_id.into(),
            live,
            request_id: request_id.into(),
            turn_id: None,
            active: None,
            awaiting_verdict: false,
            settle: false,
            last_seq: after_seq,
            first_after: after_seq,
            replayed_through: None,
            backlog: VecDeque::new(),
            caught_up: false,
            bus_closed: false,
            failed: false,
            done: false,
        }
    }

    /// Asks `active` whether the request still runs when a failed attempt's verdict is late
    /// (without it, a late verdict ends the stream after what the log holds).
    pub fn with_request_active(mut self, active: RequestActive) -> TurnFollower {
        self.active = Some(active);
        self
    }

    /// The request followed.
    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    /// The attempt being followed, once its start was seen.
    pub fn turn_id(&self) -> Option<&str> {
        self.turn_id.as_deref()
    }

    /// The next event of the turn; `None` once the turn has ended.
    pub async fn next(&mut self) -> Result<Option<Envelope>, FollowError> {
        loop {
            if self.done {
                return Ok(None);
            }
            if !self.caught_up {
                self.catch_up().await?;
                self.caught_up = true;
            }
            if let Some(env) = self.backlog.pop_front() {
                if let Some(env) = self.take(env) {
                    return Ok(Some(env));
                }
                continue;
            }
            if self.bus_closed || (self.settle && self.awaiting_verdict) {
                // The session is gone, or the request ended, and the log holds nothing more.
                self.done = true;
                return Ok(None);
            }
            let woke = if self.awaiting_verdict {
                match self.wait_live(Some(VERDICT_POLL)).await? {
                    Woke::Quiet => {
                        let running = match &self.active {
                            Some(active) => active(&self.request_id).await,
                            None => false,
                        };
                        if !running {
                            // Whatever the request wrote before it ended is in the log now.
                            self.catch_up().await?;
                            self.settle = true;
                        }
                        continue;
                    }
                    woke => woke,
                }
            } else if self.failed {
                match self.wait_live(Some(FAILED_GRACE)).await? {
                    Woke::Quiet => {
                        self.done = true;
                        return Ok(None);
                    }
                    woke => woke,
                }
            } else {
                self.wait_live(None).await?
            };
            match woke {
                Woke::Event(env) => {
                    if env.session_id == self.session_id && env.seq > self.last_seq {
                        self.backlog.push_back(*env);
                    }
                }
                Woke::Closed => {
                    self.bus_closed = true;
                    self.catch_up().await?;
                }
                Woke::Read | Woke::Quiet => {}
            }
        }
    }

    /// Goes on from the log alone: the session was taken over by another node (this one was
    /// paused or cut off past its lease), so nothing more of it arrives on the bus here, and
    /// the node that took it over writes the rest of the turn.
    fn follow_from_log(&mut self) {
        tracing::debug!(session = %self.session_id, "taken over elsewhere: following the log");
        self.live = Live::Poll(TAKEN_OVER_POLL);
        // What came on the bus may never have been committed (the new owner wrote other events
        // at those seqs): read the request again from the log, passing on only what was not
        // passed on yet and the turn's end.
        self.replayed_through = Some(self.last_seq);
        self.last_seq = self.first_after;
        self.backlog.clear();
        let log = Arc::clone(&self.log);
        let session_id = self.session_id.clone();
        self.active = Some(Arc::new(move |_: &str| {
            let (log, session_id) = (Arc::clone(&log), session_id.clone());
            Box::pin(async move { matches!(log.holder(&session_id).await, Ok(Some(_))) })
        }));
    }

    /// Waits for the next live event (up to `limit`): from the bus, or by reading the log
    /// again until it holds something new.
    async fn wait_live(&mut self, limit: Option<Duration>) -> Result<Woke, FollowError> {
        match &mut self.live {
            Live::Bus(bus) => {
                let received =
                    match tokio::time::timeout(limit.unwrap_or(HOLD_CHECK), bus.recv()).await {
                        Ok(received) => received,
                        Err(_) if limit.is_some() => return Ok(Woke::Quiet),
                        Err(_) => {
                            if !self.log.holds(&self.session_id) {
                                self.follow_from_log();
                            }
                            return Ok(Woke::Quiet);
                        }
                    };
                match received {
                    Ok(env) => Ok(Woke::Event(Box::new(env))),
                    Err(RecvError::Overflowed(_)) => {
                        self.catch_up().await?;
                        Ok(Woke::Read)
                    }
                    Err(RecvError::Closed) => Ok(Woke::Closed),
                }
            }
            Live::Poll(every) => {
                let every = *every;
                let deadline = limit.map(|l| tokio::time::Instant::now() + l);
                loop {
                    tokio::time::sleep(every).await;
                    self.catch_up().await?;
                    if !self.backlog.is_empty() {
                        return Ok(Woke::Read);
                    }
                    if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                        return Ok(Woke::Quiet);
                    }
                }
            }
        }
    }

    /// Decides whether `env` belongs to the request and is passed on (see `replayed_through`).
    fn take(&mut self, env: Envelope) -> Option<Envelope> {
        if env.seq <= self.last_seq {
            return None;
        }
        let replayed = self.replayed_through.is_some_and(|seq| env.seq <= seq);
        let env = self.adopt(env)?;
        let ends = matches!(
            env.event,
            Event::TurnFinished { .. } | Event::TurnFailed { .. }
        );
        (!replayed || ends).then_some(env)
    }

    /// Decides whether `env` belongs to the request, adopting each attempt when it starts.
    fn adopt(&mut self, env: Envelope) -> Option<Envelope> {
        self.last_seq = env.seq;
        match &env.event {
            Event::TurnStarted { request_id, .. } if *request_id == self.request_id => {
                self.turn_id = env.turn_id.clone();
                self.awaiting_verdict = false;
                self.settle = false;
                self.failed = false;
                return Some(env);
            }
            // A request that failed before its turn could start ends the stream.
            Event::TurnFailed {
                request_id: Some(request_id),
                ..
            } if *request_id == self.request_id && env.turn_id.is_none() => {
                self.done = true;
                return Some(env);
            }
            _ => {}
        }
        if self.turn_id.is_none() || env.turn_id != self.turn_id {
            return None;
        }
        match env.event {
            Event::TurnFinished {
                status: TurnStatus::Error,
                ..
            } if !self.failed => self.awaiting_verdict = true,
            Event::TurnFinished { .. } => self.done = true,
            Event::TurnFailed { .. } if self.awaiting_verdict => self.done = true,
            Event::TurnFailed { .. } => self.failed = true,
            _ => {}
        }
        Some(env)
    }

    /// Flushes the log and reads every event of the session after `last_seq` into the backlog.
    async fn catch_up(&mut self) -> Result<(), FollowError> {
        let store_error = |session_id: &str, after_seq: u64| {
            let session_id = session_id.to_owned();
            move |source| FollowError::Store {
                session_id,
                after_seq,
                source,
            }
        };
        self.log
            .flush(&self.session_id)
            .await
            .map_err(store_error(&self.session_id, self.last_seq))?;
        let mut after = self.last_seq;
        let mut pages = Vec::new();
        loop {
            let page = self
                .log
                .session_page(&self.session_id, after, PAGE)
                .await
                .map_err(store_error(&self.session_id, after))?;
            let full = page.len() == PAGE;
            if let Some(last) = page.last() {
                after = last.seq;
            }
            pages.extend(page);
            if !full {
                break;
            }
        }
        // Events already on the bus that the log also returned are dropped by `take` (seq order).
        let mut merged: Vec<Envelope> = self.backlog.drain(..).collect();
        merged.extend(pages);
        merged.sort_by_key(|e| e.seq);
        merged.dedup_by_key(|e| e.seq);
        self.backlog = merged.into();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;
    use mull_core::{EntryPath, StreamPart, TurnStatus, Usage};
    use mull_store::Log;
    use serde_json::json;

    struct Fixture {
        _dir: tempfile::TempDir,
        log: Log,
        tx: async_broadcast::Sender<Envelope>,
        rx: async_broadcast::InactiveReceiver<Envelope>,
    }

    fn fixture(capacity: usize) -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("log.db")).expect("open log");
        let (mut tx, rx) = async_broadcast::broadcast(capacity);
        tx.set_overflow(true);
        // As the engine's bus: a broadcast with no active receiver must not wait for one.
        tx.set_await_active(false);
        Fixture {
            _dir: dir,
            log,
            tx,
            rx: rx.deactivate(),
        }
    }

    /// Appends and broadcasts, as the engine does.
    async fn emit(f: &Fixture, session: &str, turn: Option<&str>, event: Event) -> Envelope {
        let at = DateTime::from_timestamp(0, 0).unwrap_or_default();
        let env = f.log.append(session, turn, at, event).expect("append");
        let _ = f.tx.broadcast_direct(env.clone()).await;
        env
    }

    fn started(request: &str) -> Event {
        Event::TurnStarted {
            request_id: request.into(),
            message_id: format!("msg_{request}"),
            entry: EntryPath::Http,
            continuation: false,
            attempt: 0,
            body: json!({}),
        }
    }

    fn delta(text: &str) -> Event {
        Event::Chunk {
            step: 0,
            part: StreamPart::TextDelta {
                id: "t".into(),
                text: text.into(),
            },
            original: None,
        }
    }

    fn finished(request: &str) -> Event {
        Event::TurnFinished {
            request_id: request.into(),
            status: TurnStatus::Completed,
            error: None,
            steps: 1,
            usage: Usage::default(),
        }
    }

    async fn drain(follower: &mut TurnFollower) -> Vec<u64> {
        let mut seqs = Vec::new();
        while let Some(env) = follower.next().await.expect("follows") {
            seqs.push(env.seq);
        }
        seqs
    }

    #[tokio::test]
    async fn a_turn_half_written_before_the_follower_is_seen_once_in_order() {
        let f = fixture(64);
        emit(&f, "s", Some("t1"), started("r1")).await;
        emit(&f, "other", Some("tx"), started("rx")).await;
        emit(&f, "s", Some("t1"), delta("a")).await;
        let bus = f.rx.activate_cloned();
        let mut follower = TurnFollower::new(Arc::new(f.log.clone()), "s", bus, 0, "r1");
        let first = follower.next().await.expect("follows").expect("an event");
        assert_eq!(first.seq, 1);
        emit(&f, "s", Some("t1"), delta("b")).await;
        emit(&f, "other", Some("tx"), delta("x")).await;
        emit(&f, "s", Some("t1"), finished("r1")).await;
        emit(&f, "s", Some("t2"), started("r2")).await;
        let rest = drain(&mut follower).await;
        assert_eq!(rest, vec![3, 4, 6]);
        assert_eq!(follower.turn_id(), Some("t1"));
    }

    #[tokio::test]
    async fn the_requests_turn_is_adopted_when_it_starts_and_no_other() {
        let f = fixture(64);
        emit(&f, "s", Some("t1"), started("r1")).await;
        emit(&f, "s", Some("t1"), finished("r1")).await;
        let bus = f.rx.activate_cloned();
        let mut follower = TurnFollower::new(Arc::new(f.log.clone()), "s", bus, 2, "r3");
        let writer = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            // An unrelated request's turn starts first.
            emit(&f, "s", Some("t2"), started("r2")).await;
            emit(&f, "s", Some("t2"), delta("other")).await;
            emit(&f, "s", Some("t2"), finished("r2")).await;
            emit(&f, "s", Some("t3"), started("r3")).await;
            emit(&f, "s", Some("t3"), delta("x")).await;
            emit(&f, "s", Some("t3"), finished("r3")).await;
        };
        let (seqs, ()) = tokio::join!(drain(&mut follower), writer);
        assert_eq!(seqs, vec![6, 7, 8]);
        assert_eq!(follower.turn_id(), Some("t3"));
    }

    fn failed_attempt(request: &str) -> Event {
        Event::TurnFinished {
            request_id: request.into(),
            status: TurnStatus::Error,
            error: Some("prompt is too long".into()),
            steps: 0,
            usage: Usage::default(),
        }
    }

    fn retry(request: &str) -> Event {
        Event::TurnStarted {
            request_id: request.into(),
            message_id: format!("msg_{request}_retry"),
            entry: EntryPath::Http,
            continuation: false,
            attempt: 1,
            body: json!({}),
        }
    }

    fn final_failure(request: &str) -> Event {
        Event::TurnFailed {
            request_id: Some(request.into()),
            stage: mull_core::ErrorStage::Stream,
            messages_persisted: true,
            classification: Some(mull_core::ChatErrorClassification::ContextOverflow),
            error: "prompt is too long".into(),
            model_error: None,
        }
    }

    #[tokio::test]
    async fn a_retried_request_is_followed_to_its_last_attempt() {
        let f = fixture(64);
        let bus = f.rx.activate_cloned();
        let mut follower = TurnFollower::new(Arc::new(f.log.clone()), "s", bus, 0, "r1");
        let writer = async {
            emit(&f, "s", Some("t1"), started("r1")).await;
            emit(&f, "s", Some("t1"), failed_attempt("r1")).await;
            // Compaction takes a while before the retry starts.
            tokio::time::sleep(Duration::from_millis(50)).await;
            emit(&f, "s", Some("t2"), retry("r1")).await;
            emit(&f, "s", Some("t2"), delta("answer")).await;
            emit(&f, "s", Some("t2"), finished("r1")).await;
        };
        let (seqs, ()) = tokio::join!(drain(&mut follower), writer);
        assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
        assert_eq!(follower.turn_id(), Some("t2"));
    }

    #[tokio::test]
    async fn a_failed_attempt_ends_the_stream_at_its_final_failure() {
        let f = fixture(64);
        let bus = f.rx.activate_cloned();
        let mut follower = TurnFollower::new(Arc::new(f.log.clone()), "s", bus, 0, "r1")
            .with_request_active(Arc::new(|_: &str| Box::pin(async { true })));
        emit(&f, "s", Some("t1"), started("r1")).await;
        emit(&f, "s", Some("t1"), failed_attempt("r1")).await;
        emit(&f, "s", Some("t1"), final_failure("r1")).await;
        emit(&f, "s", Some("t2"), started("r2")).await;
        assert_eq!(drain(&mut follower).await, vec![1, 2, 3]);
    }

    #[tokio::test]
    async fn a_late_verdict_ends_the_stream_once_the_request_is_over() {
        let f = fixture(64);
        let bus = f.rx.activate_cloned();
        let running = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let probe = std::sync::Arc::clone(&running);
        let mut follower = TurnFollower::new(Arc::new(f.log.clone()), "s", bus, 0, "r1")
            .with_request_active(Arc::new(move |request: &str| {
                let active = request == "r1" && probe.load(std::sync::atomic::Ordering::SeqCst);
                Box::pin(async move { active })
            }));
        emit(&f, "s", Some("t1"), started("r1")).await;
        emit(&f, "s", Some("t1"), failed_attempt("r1")).await;
        let ender = async {
            // Longer than a poll: the request still runs, so the follower keeps waiting.
            tokio::time::sleep(VERDICT_POLL * 3).await;
            running.store(false, std::sync::atomic::Ordering::SeqCst);
        };
        let (seqs, ()) = tokio::join!(drain(&mut follower), ender);
        assert_eq!(seqs, vec![1, 2]);
        assert!(!running.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[tokio::test]
    async fn an_overflowing_bus_is_made_good_from_the_log() {
        let f = fixture(2);
        let bus = f.rx.activate_cloned();
        let mut follower = TurnFollower::new(Arc::new(f.log.clone()), "s", bus, 0, "r1");
        emit(&f, "s", Some("t1"), started("r1")).await;
        for i in 0..50 {
            emit(&f, "s", Some("t1"), delta(&i.to_string())).await;
        }
        emit(&f, "s", Some("t1"), finished("r1")).await;
        let seqs = drain(&mut follower).await;
        assert_eq!(seqs, (1..=52).collect::<Vec<u64>>());
    }

    #[tokio::test]
    async fn a_request_that_failed_before_its_turn_ends_the_stream() {
        let f = fixture(8);
        let bus = f.rx.activate_cloned();
        let mut follower = TurnFollower::new(Arc::new(f.log.clone()), "s", bus, 0, "r9");
        emit(
            &f,
            "s",
            None,
            Event::TurnFailed {
                request_id: Some("r9".into()),
                stage: mull_core::ErrorStage::Persist,
                messages_persisted: false,
                classification: None,
                error: "disk full".into(),
                model_error: None,
            },
        )
        .await;
        assert_eq!(drain(&mut follower).await, vec![1]);
    }

    #[tokio::test]
    async fn a_closed_bus_ends_after_what_the_log_holds() {
        let f = fixture(8);
        let bus = f.rx.activate_cloned();
        let mut follower = TurnFollower::new(Arc::new(f.log.clone()), "s", bus, 0, "r1");
        emit(&f, "s", Some("t1"), started("r1")).await;
        emit(&f, "s", Some("t1"), delta("a")).await;
        let Fixture { tx, rx, .. } = f;
        drop(rx);
        drop(tx);
        assert_eq!(drain(&mut follower).await, vec![1, 2]);
    }
}
