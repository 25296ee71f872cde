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

use std::collections::VecDeque;
use std::time::Duration;

use async_broadcast::{Receiver, RecvError};
use mull_core::{Envelope, Event, TurnStatus};
use mull_store::{Log, LogReader, StoreError};

/// Events read from the log per query.
const PAGE: usize = 512;

/// How long a follower waits for `turn_finished` after a `turn_failed` before ending anyway.
const FAILED_GRACE: Duration = Duration::from_secs(2);

/// Answers whether a request is still queued or running in its session (see
/// `Session::is_request_active`); a follower asks it when a failed attempt's verdict is late.
pub type RequestActive = std::sync::Arc<dyn Fn(&str) -> bool + Send + Sync>;

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
    /// The blocking read task died.
    #[error("reading session {session_id} from the log: the read task failed: {reason}")]
    ReadTask { session_id: String, reason: String },
}

/// Yields the events of one request's turns, in `seq` order, exactly once, until the request's
/// last attempt ends.
pub struct TurnFollower {
    log: Log,
    reader: Option<LogReader>,
    session_id: String,
    bus: Receiver<Envelope>,
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
        log: Log,
        session_id: impl Into<String>,
        bus: Receiver<Envelope>,
        after_seq: u64,
        request_id: impl Into<String>,
    ) -> TurnFollower {
        TurnFollower {
            log,
            reader: None,
            session_id: session_id.into(),
            bus,
            request_id: request_id.into(),
            turn_id: None,
            active: None,
            awaiting_verdict: false,
            settle: false,
            last_seq: after_seq,
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
            let received = if self.awaiting_verdict {
                match tokio::time::timeout(VERDICT_POLL, self.bus.recv()).await {
                    Ok(received) => received,
                    Err(_) => {
                        let request_id = &self.request_id;
                        let running = self
                            .active
                            .as_ref()
                            .is_some_and(|active| active(request_id));
                        if !running {
                            // Whatever the request wrote before it ended is in the log now.
                            self.catch_up().await?;
                            self.settle = true;
                        }
                        continue;
                    }
                }
            } else if self.failed {
                match tokio::time::timeout(FAILED_GRACE, self.bus.recv()).await {
                    Ok(received) => received,
                    Err(_) => {
                        self.done = true;
                        return Ok(None);
                    }
                }
            } else {
                self.bus.recv().await
            };
            match received {
                Ok(env) => {
                    if env.session_id == self.session_id && env.seq > self.last_seq {
                        self.backlog.push_back(env);
                    }
                }
                Err(RecvError::Overflowed(_)) => self.catch_up().await?,
                Err(RecvError::Closed) => {
                    self.bus_closed = true;
                    self.catch_up().await?;
                }
            }
        }
    }

    /// Decides whether `env` belongs to the request, adopting each attempt when it starts.
    fn take(&mut self, env: Envelope) -> Option<Envelope> {
        if env.seq <= self.last_seq {
            return None;
        }
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
            .flush()
            .await
            .map_err(store_error(&self.session_id, self.last_seq))?;
        let reader = match self.reader.take() {
            Some(reader) => reader,
            None => self
                .log
                .reader()
                .map_err(store_error(&self.session_id, self.last_seq))?,
        };
        let session_id = self.session_id.clone();
        let after = self.last_seq;
        let (reader, pages) = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            let mut after = after;
            loop {
                match reader.session_page(&session_id, after, PAGE) {
                    Ok(page) => {
                        let full = page.len() == PAGE;
                        if let Some(last) = page.last() {
                            after = last.seq;
                        }
                        out.extend(page);
                        if !full {
                            return (reader, Ok(out));
                        }
                    }
                    Err(err) => return (reader, Err((after, err))),
                }
            }
        })
        .await
        .map_err(|e| FollowError::ReadTask {
            session_id: self.session_id.clone(),
            reason: e.to_string(),
        })?;
        self.reader = Some(reader);
        let pages = pages.map_err(|(after, source)| FollowError::Store {
            session_id: self.session_id.clone(),
            after_seq: after,
            source,
        })?;
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
        let mut follower = TurnFollower::new(f.log.clone(), "s", bus, 0, "r1");
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
        let mut follower = TurnFollower::new(f.log.clone(), "s", bus, 2, "r3");
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
        let mut follower = TurnFollower::new(f.log.clone(), "s", bus, 0, "r1");
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
        let mut follower = TurnFollower::new(f.log.clone(), "s", bus, 0, "r1")
            .with_request_active(std::sync::Arc::new(|_: &str| true));
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
        let mut follower = TurnFollower::new(f.log.clone(), "s", bus, 0, "r1").with_request_active(
            std::sync::Arc::new(move |request: &str| {
                request == "r1" && probe.load(std::sync::atomic::Ordering::SeqCst)
            }),
        );
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
        let mut follower = TurnFollower::new(f.log.clone(), "s", bus, 0, "r1");
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
        let mut follower = TurnFollower::new(f.log.clone(), "s", bus, 0, "r9");
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
        let mut follower = TurnFollower::new(f.log.clone(), "s", bus, 0, "r1");
        emit(&f, "s", Some("t1"), started("r1")).await;
        emit(&f, "s", Some("t1"), delta("a")).await;
        let Fixture { tx, rx, .. } = f;
        drop(rx);
        drop(tx);
        assert_eq!(drain(&mut follower).await, vec![1, 2]);
    }
}
